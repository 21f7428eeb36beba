package agentrunner

import (
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

// ProtocolVersion is the major protocol version this kit speaks.
const ProtocolVersion = "1"

var runnerID = regexp.MustCompile(`(?i)^plugin:[a-z0-9][a-z0-9_.-]*/[a-z0-9][a-z0-9_.-]*/[a-z0-9][a-z0-9_.-]*$`)

// Text is an I18nText with one en_US translation.
func Text(en string) *pb.I18NText {
	return &pb.I18NText{Translations: map[string]string{"en_US": en}}
}

// CheckManifest completes a manifest (name = last id segment, protocol_version "1",
// capabilities.event_context) and returns the copy, or an error naming the first problem: the rules a
// host applies when it discovers the runner.
func CheckManifest(m *pb.RunnerManifest) (*pb.RunnerManifest, error) {
	out := proto.Clone(m).(*pb.RunnerManifest)
	if !runnerID.MatchString(out.GetId()) {
		return nil, fmt.Errorf("manifest id %q must look like plugin:<author>/<name>/<runner>", out.GetId())
	}
	last := out.GetId()[strings.LastIndex(out.GetId(), "/")+1:]
	if out.Name == "" {
		out.Name = last
	} else if out.Name != last {
		return nil, fmt.Errorf("manifest name %q is not the last segment of the id", out.Name)
	}
	if out.ProtocolVersion == "" {
		out.ProtocolVersion = ProtocolVersion
	} else if strings.SplitN(out.ProtocolVersion, ".", 2)[0] != ProtocolVersion {
		return nil, fmt.Errorf("manifest protocol_version %q is not %q", out.ProtocolVersion, ProtocolVersion)
	}
	if len(out.GetLabel().GetTranslations()) == 0 {
		return nil, fmt.Errorf("manifest %s needs a label", out.GetId())
	}
	if out.Capabilities == nil {
		out.Capabilities = &pb.RunnerCapabilities{}
	}
	out.Capabilities.EventContext = true
	if err := checkPermissions(out.GetPermissions()); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, f := range out.GetConfigSchema() {
		switch {
		case f.GetName() == "":
			return nil, fmt.Errorf("config_schema[%d] needs a name", i)
		case seen[f.GetName()]:
			return nil, fmt.Errorf("config field %q is declared twice", f.GetName())
		case f.GetType() == pb.ConfigFieldType_CONFIG_FIELD_TYPE_UNSPECIFIED:
			return nil, fmt.Errorf("config field %q needs a type", f.GetName())
		case f.GetType() == pb.ConfigFieldType_CONFIG_FIELD_TYPE_SELECT && len(f.GetOptions()) == 0:
			return nil, fmt.Errorf("config field %q is a select without options", f.GetName())
		}
		seen[f.GetName()] = true
		if d := f.GetDefaultValue(); d != nil {
			if _, err := checkField(f, d.AsInterface()); err != nil && d.AsInterface() != nil {
				return nil, fmt.Errorf("config field %q: default does not match its type", f.GetName())
			}
		}
	}
	return out, nil
}

// checkPermissions rejects unset (0) and unknown enum values in every repeated enum permission.
func checkPermissions(p *pb.RunnerPermissions) error {
	if p == nil {
		return nil
	}
	var problem error
	p.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.EnumKind || !fd.IsList() {
			return true
		}
		list := v.List()
		for i := 0; i < list.Len(); i++ {
			n := list.Get(i).Enum()
			if n == 0 || fd.Enum().Values().ByNumber(n) == nil {
				problem = fmt.Errorf("permissions.%s: invalid value %d", fd.Name(), n)
				return false
			}
		}
		return true
	})
	return problem
}
